module loom/chanbench-go

go 1.19
