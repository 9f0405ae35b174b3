//go:build mut_emptysendqueued

package mut

// EmptySendQueued is on: a zero-length send on a stream is queued for a transfer like any other instead of completing at once.
const EmptySendQueued = true

// Active names the mutant compiled in.
const Active = "mut_emptysendqueued"
