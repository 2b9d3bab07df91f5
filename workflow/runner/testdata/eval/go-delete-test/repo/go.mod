module fx

go 1.22
