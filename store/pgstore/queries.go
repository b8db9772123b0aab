package pgstore

import _ "embed"

// The store's statements, one file each; every file says what it does and
// which parameters it takes.
var (
	//go:embed sql/claim.sql
	claimSQL string
	//go:embed sql/peek.sql
	peekSQL string
	//go:embed sql/get.sql
	getSQL string
	//go:embed sql/complete.sql
	completeSQL string
	//go:embed sql/release.sql
	releaseSQL string
	//go:embed sql/extend.sql
	extendSQL string
	//go:embed sql/mark_unknown.sql
	markUnknownSQL string
	//go:embed sql/sweep.sql
	sweepSQL string
)
