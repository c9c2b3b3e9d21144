module ubatch

go 1.26.8
