module ubatch

go 1.26.8

require (
	github.com/ardanlabs/jinja v1.8.0
	golang.org/x/sys v0.50.0
)

require github.com/prometheus/client_golang v1.25.0 // indirect
