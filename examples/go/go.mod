module github.com/reshard/reshard/examples/go

go 1.19

require github.com/reshard/reshard/bindings/go/reshard v0.1.0

require github.com/google/flatbuffers v2.0.8+incompatible // indirect
