package measure

import "fmt"

// SizeName names a byte count in binary units, as reports write sizes:
// "64 B", "4 KiB", "1 MiB".
func SizeName(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// BitRate names a bit rate in decimal units: "10 Gbit/s", "unlimited" for
// zero.
func BitRate(bps float64) string {
	switch {
	case bps <= 0:
		return "unlimited"
	case bps >= 1e9:
		return fmt.Sprintf("%g Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%g Mbit/s", bps/1e6)
	}
	return fmt.Sprintf("%g bit/s", bps)
}
