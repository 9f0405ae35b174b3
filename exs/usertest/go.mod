module github.com/exsgo/exs/exs/usertest

go 1.26.0

require (
	github.com/exsgo/exs v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/exsgo/exs => ../..
