package vm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// An overlay is written here rather than by qemu-img, whose process
// start cost a restore 35–60 ms here (every restore makes one). It is
// what `qemu-img create -f qcow2 -b BASE -F FORMAT` writes (version 3,
// 64 KiB clusters, 16-bit refcounts): the header with the backing
// format and name in cluster 0, the refcount table in cluster 1, its one
// block in cluster 2 (counting clusters 0–3), and the empty L1 table in
// cluster 3; no data cluster, so every read falls through to the base.
const (
	qcowMagic      = 0x514649fb
	qcowClusterLog = 16
	qcowCluster    = 1 << qcowClusterLog
	// qcowL2Span is what one L1 entry covers: an L2 table of 8-byte
	// entries, each one cluster.
	qcowL2Span = qcowCluster * (qcowCluster / 8)
	// qcowHeaderLen is version 3's header with the compression type
	// byte, padded to 8 bytes.
	qcowHeaderLen = 112
	// qcowBackingFormat is the header extension naming the base's format.
	qcowBackingFormat = 0xe2792aca
)

// overlay makes a qcow2 disk at path whose reads fall through to base
// (resolved beside path if relative), of base's virtual size.
func overlay(path, base, baseFormat string) error {
	abs := base
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(filepath.Dir(path), base)
	}
	size, err := virtualSize(abs, baseFormat)
	if err != nil {
		return fmt.Errorf("overlay of %s: %w", base, err)
	}
	l1 := (size + qcowL2Span - 1) / qcowL2Span
	if l1 > qcowCluster/8 {
		return fmt.Errorf("overlay of %s: %d bytes is over the %d an overlay's one L1 cluster maps", base, size, qcowCluster/8*qcowL2Span)
	}
	var h [qcowHeaderLen]byte
	be := binary.BigEndian
	be.PutUint32(h[0:], qcowMagic)
	be.PutUint32(h[4:], 3)
	ext := qcowExtension(qcowBackingFormat, []byte(baseFormat))
	ext = append(ext, make([]byte, 8)...) // the end of the extensions
	be.PutUint64(h[8:], uint64(qcowHeaderLen+len(ext)))
	be.PutUint32(h[16:], uint32(len(base)))
	be.PutUint32(h[20:], qcowClusterLog)
	be.PutUint64(h[24:], uint64(size))
	be.PutUint32(h[36:], uint32(l1))
	be.PutUint64(h[40:], 3*qcowCluster)
	be.PutUint64(h[48:], qcowCluster)
	be.PutUint32(h[56:], 1)
	be.PutUint32(h[96:], 4) // refcount order: 16 bits
	be.PutUint32(h[100:], qcowHeaderLen)
	header := append(append(h[:], ext...), base...)
	if len(header) > qcowCluster {
		return fmt.Errorf("overlay of %s: backing name too long", base)
	}
	img := make([]byte, 3*qcowCluster+int(l1)*8)
	copy(img, header)
	be.PutUint64(img[qcowCluster:], 2*qcowCluster)
	for i := range 4 {
		be.PutUint16(img[2*qcowCluster+2*i:], 1)
	}
	return writeFileAtomic(path, img)
}

// qcowExtension is a header extension: magic, length, data padded to 8.
func qcowExtension(magic uint32, data []byte) []byte {
	p := make([]byte, 8+(len(data)+7)/8*8)
	binary.BigEndian.PutUint32(p[0:], magic)
	binary.BigEndian.PutUint32(p[4:], uint32(len(data)))
	copy(p[8:], data)
	return p
}

// virtualSize is the size of the disk path holds: a raw file's length, or
// a qcow2 header's size.
func virtualSize(path, format string) (int64, error) {
	switch format {
	case "raw":
		fi, err := os.Stat(path)
		if err != nil {
			return 0, err
		}
		return fi.Size(), nil
	case "qcow2":
		f, h, err := openQcow(path, 32)
		if err != nil {
			return 0, err
		}
		f.Close()
		return int64(binary.BigEndian.Uint64(h[24:])), nil
	}
	return 0, errors.New("unknown disk format " + format)
}

// backingName is the backing file a qcow2 header at path names, as
// written (relative names are relative to path's directory).
func backingName(path string) (string, error) {
	f, h, err := openQcow(path, 20)
	if err != nil {
		return "", err
	}
	defer f.Close()
	off, n := binary.BigEndian.Uint64(h[8:]), binary.BigEndian.Uint32(h[16:])
	if off == 0 || n == 0 || n > qcowCluster {
		return "", fmt.Errorf("%s: no backing file", path)
	}
	name := make([]byte, n)
	if _, err := f.ReadAt(name, int64(off)); err != nil {
		return "", fmt.Errorf("%s: backing name: %w", path, err)
	}
	return string(name), nil
}

// openQcow opens the qcow2 image at path and reads the first n bytes of
// its header.
func openQcow(path string, n int) (*os.File, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	h := make([]byte, n)
	if _, err := io.ReadFull(f, h); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if binary.BigEndian.Uint32(h) != qcowMagic {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a qcow2 image", path)
	}
	return f, h, nil
}
