//go:build mut_msgunitsbytes

package mut

// MessageUnitsBytes is on: copying a message out of the stream buffer advances S_r and S'_r by the message's bytes instead of by one message.
const MessageUnitsBytes = true

// Active names the mutant compiled in.
const Active = "mut_msgunitsbytes"
