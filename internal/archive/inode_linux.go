package archive

import (
	"io/fs"
	"syscall"
)

func inode(fi fs.FileInfo) (ino uint64, nlink uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino, uint64(st.Nlink)
	}
	return 0, 1
}
