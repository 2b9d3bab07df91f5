package api

// VolumeRequest is the body of POST /v1/volumes; the reply is a
// sandbox.Volume.
type VolumeRequest struct {
	Name string `json:"name"`
	// Size is the quota (bytes, or a string such as "10g"); absent is
	// 1 GiB.
	Size Bytes `json:"size,omitempty"`
}
