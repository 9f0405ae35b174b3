package dynproto_test

import (
	"errors"
	"testing"

	"github.com/exsgo/exs/dynproto"
	"github.com/google/go-cmp/cmp"
)

// TestConfigCheck: New refuses every invalid field with an error matching
// ErrConfig, and accepts the valid edges.
func TestConfigCheck(t *testing.T) {
	rows := []struct {
		name string
		edit func(*dynproto.Config)
		bad  bool
	}{
		{"valid", func(*dynproto.Config) {}, false},
		{"mode 0", func(c *dynproto.Config) { c.Mode = 0 }, true},
		{"mode past the last", func(c *dynproto.Config) { c.Mode = dynproto.IndirectOnly + 1 }, true},
		{"type 0", func(c *dynproto.Config) { c.Type = 0 }, true},
		{"negative stream buffer", func(c *dynproto.Config) { c.RecvBuffer = -1 }, true},
		{"stream buffer past 2 GiB", func(c *dynproto.Config) { c.PeerRecvBuffer = 1<<31 + 1 }, true},
		{"dynamic without a stream buffer", func(c *dynproto.Config) { c.RecvBuffer = 0 }, true},
		{"direct-only without a stream buffer", func(c *dynproto.Config) {
			c.Mode, c.RecvBuffer, c.PeerRecvBuffer, c.AckThreshold = dynproto.DirectOnly, 0, 0, 0
		}, false},
		{"no frame buffers", func(c *dynproto.Config) { c.Frames = 0 }, true},
		{"too many peer frame buffers", func(c *dynproto.Config) { c.PeerFrames = 65536 }, true},
		{"ack threshold past the stream buffer", func(c *dynproto.Config) { c.AckThreshold = 65 }, true},
		{"negative ack threshold", func(c *dynproto.Config) { c.AckThreshold = -1 }, true},
		{"negative gather", func(c *dynproto.Config) { c.MaxGather = -1 }, true},
		{"negative hint minimum", func(c *dynproto.Config) { c.HintMin = -1 }, true},
		{"negative indirect maximum", func(c *dynproto.Config) { c.MaxIndirect = -1 }, true},
		{"negative advert minimum", func(c *dynproto.Config) { c.AdvertMin = -1 }, true},
		{"indirect maximum and advert minimum", func(c *dynproto.Config) { c.MaxIndirect, c.AdvertMin = 16, 8 }, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			cfg := scenarioConfig()
			r.edit(&cfg)
			_, err := dynproto.New(cfg)
			if diff := cmp.Diff(r.bad, errors.Is(err, dynproto.ErrConfig)); diff != "" {
				t.Errorf("New: %v; refused as ErrConfig (-want +got):\n%s", err, diff)
			}
			if !r.bad && err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}
