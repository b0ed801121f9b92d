module loom/lockbench-go

go 1.19
