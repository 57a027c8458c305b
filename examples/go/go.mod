module github.com/reshard/reshard/examples/go

go 1.19

require github.com/reshard/reshard/bindings/go v0.1.0

require github.com/google/flatbuffers v2.0.8+incompatible // indirect

// The examples build against the bindings in this repository.
replace github.com/reshard/reshard/bindings/go => ../../bindings/go
