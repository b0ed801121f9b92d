module loom/go-web

go 1.19
