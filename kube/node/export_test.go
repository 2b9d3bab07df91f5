package node

// Owner is owner, for the external tests.
var Owner = owner
