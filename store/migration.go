package store

// Migration is one schema migration that a SQL store's Migrate (or `idem
// migrate`) applied: Version orders a store's migrations, Name is the file
// that holds it.
type Migration struct {
	Version int64
	Name    string
}
