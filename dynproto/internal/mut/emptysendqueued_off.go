//go:build !mut_emptysendqueued

package mut

// EmptySendQueued, when on (build tag mut_emptysendqueued): a zero-length send on a stream is queued for a transfer like any other instead of completing at once.
const EmptySendQueued = false
