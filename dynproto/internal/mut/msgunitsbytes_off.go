//go:build !mut_msgunitsbytes

package mut

// MessageUnitsBytes, when on (build tag mut_msgunitsbytes): copying a message out of the stream buffer advances S_r and S'_r by the message's bytes instead of by one message.
const MessageUnitsBytes = false
