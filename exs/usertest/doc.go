// Package usertest holds tests of exs written as its users write programs:
// a module of its own that imports only the exported API (package exs), so
// that nothing in them reaches an internal hook, and that checks the
// behaviours a user relies on: how a connection ends, connects and their
// limits, errors and the small promises of the API. Each test runs over the
// in-process provider and, where two processes matter, between this test
// binary and a child process of itself over the same-host provider.
//
// Run it from this directory: go test -race ./...
package usertest
