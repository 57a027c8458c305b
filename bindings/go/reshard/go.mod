module github.com/reshard/reshard/bindings/go/reshard

go 1.19

require github.com/google/flatbuffers v2.0.8+incompatible
