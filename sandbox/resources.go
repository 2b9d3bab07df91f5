package sandbox

// Limits bound a sandbox's resources. Zero means the backend default.
type Limits struct {
	CPUs   float64 // cores
	Memory int64   // bytes
	Pids   int64
	Disk   int64 // bytes of writable layer
}

// Stats is a snapshot of resource usage.
type Stats struct {
	// MemoryBytes is all memory charged to the sandbox, page cache of the
	// files it read included; ResidentBytes is what only it holds and the
	// host cannot reclaim: anonymous memory and gVisor's memory file.
	MemoryBytes    int64
	ResidentBytes  int64
	MemoryLimit    int64
	CPUNanos       int64
	Pids           int64
	OOMKills       int64
	ProcessesAlive bool
}
