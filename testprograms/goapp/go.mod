module spanprof.test/goapp

go 1.19
