module idemd.dev/go/idemd

go 1.22
