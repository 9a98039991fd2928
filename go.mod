module github.com/fdbrep/fdbrep

go 1.26.8
