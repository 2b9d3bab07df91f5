sed -i 's|return header + "\\n" + strings.Join|return header + "\\n" + strings.Repeat("-", len(header)) + "\\n" + strings.Join|' table.go
