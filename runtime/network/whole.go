package network

// Whole reports whether sandbox id's network is whole: its namespace
// mounted, its helper running and its table in place. Recovery after a
// crash uses it to tell a create that finished from one that did not.
func (h *Host) Whole(id string) bool { return h.whole(id) }
