package e2bapi

// VolumeMount is E2B's SandboxVolumeMount: a create's volumeMounts and a
// sandbox's detail. E2B mounts volumes read-write.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// NewVolume is the body of POST /volumes.
type NewVolume struct {
	Name string `json:"name"`
}

// Volume is an entry of GET /volumes. A smolvm volume's ID is its name.
type Volume struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

// VolumeAndToken answers POST /volumes and GET /volumes/{id}. Token is
// what E2B's volume content API (/volumecontent) takes.
type VolumeAndToken struct {
	Volume
	Token string `json:"token"`
}
