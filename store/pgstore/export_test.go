package pgstore

// ClaimSQL lets tests drive the claim statement without the read in front
// of it, as a race between that read and the statement would.
var ClaimSQL = claimSQL

// Migrations lets tests migrate down, which Migrate never does.
var Migrations = migrations
