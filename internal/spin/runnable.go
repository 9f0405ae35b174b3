package spin

// parseRunnable reads the runnable count from a /proc/loadavg line: the
// digits after the third space, up to the slash.
func parseRunnable(b []byte) (int64, bool) {
	spaces, i := 0, 0
	for ; i < len(b) && spaces < 3; i++ {
		if b[i] == ' ' {
			spaces++
		}
	}
	var v int64
	digits := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9' && digits < 9; i++ {
		v = v*10 + int64(b[i]-'0')
		digits++
	}
	if spaces < 3 || digits == 0 || i >= len(b) || b[i] != '/' {
		return 0, false
	}
	return v, true
}
