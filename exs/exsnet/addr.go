package exsnet

// Network is the network name of exs addresses: what Addr.Network
// returns.
const Network = "exs"

// Addr is the address of a listener or of one end of a connection: the
// exs provider's address, such as "inproc:echo" or "shm:/run/app.sock"
// (see package exs, "Sockets and connections"). It implements net.Addr.
type Addr string

// Network returns "exs".
func (a Addr) Network() string { return Network }

// String returns the provider's address.
func (a Addr) String() string { return string(a) }
