package gguf

import "fmt"

// valueType is GGUF's on-disk metadata value type tag (gguf_type in ggml).
type valueType uint32

const (
	typeUint8   valueType = 0
	typeInt8    valueType = 1
	typeUint16  valueType = 2
	typeInt16   valueType = 3
	typeUint32  valueType = 4
	typeInt32   valueType = 5
	typeFloat32 valueType = 6
	typeBool    valueType = 7
	typeString  valueType = 8
	typeArray   valueType = 9
	typeUint64  valueType = 10
	typeInt64   valueType = 11
	typeFloat64 valueType = 12
)

// maxArrayDepth (levels of array, 1 for a plain array) bounds nesting of arrays of arrays so a hostile file cannot recurse deeply.
const maxArrayDepth = 8

var valueTypeNames = [...]string{
	typeUint8: "uint8", typeInt8: "int8", typeUint16: "uint16", typeInt16: "int16",
	typeUint32: "uint32", typeInt32: "int32", typeFloat32: "float32", typeBool: "bool",
	typeString: "string", typeArray: "array", typeUint64: "uint64", typeInt64: "int64",
	typeFloat64: "float64",
}

func (t valueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// fixedSize is the encoded size of one scalar of type t, or 0 for strings, arrays and unknown tags.
func (t valueType) fixedSize() uint64 {
	switch t {
	case typeUint8, typeInt8, typeBool:
		return 1
	case typeUint16, typeInt16:
		return 2
	case typeUint32, typeInt32, typeFloat32:
		return 4
	case typeUint64, typeInt64, typeFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes one encoded value of type t can take (a string's length prefix, an
// array's element type and count); 0 for unknown tags. Element counts are bounded with it.
func (t valueType) minSize() uint64 {
	switch t {
	case typeString:
		return 8
	case typeArray:
		return 12
	}
	return t.fixedSize()
}

// typeOf maps a Go value to its GGUF type tag and, for slices, the element tag. Accepted are the
// types Parse produces: the scalar Go types matching GGUF's, typed slices of them, and []any whose
// elements are themselves accepted slices (GGUF's array of arrays).
func typeOf(v any) (t, elem valueType, err error) {
	switch v := v.(type) {
	case uint8:
		return typeUint8, 0, nil
	case int8:
		return typeInt8, 0, nil
	case uint16:
		return typeUint16, 0, nil
	case int16:
		return typeInt16, 0, nil
	case uint32:
		return typeUint32, 0, nil
	case int32:
		return typeInt32, 0, nil
	case float32:
		return typeFloat32, 0, nil
	case bool:
		return typeBool, 0, nil
	case string:
		return typeString, 0, nil
	case uint64:
		return typeUint64, 0, nil
	case int64:
		return typeInt64, 0, nil
	case float64:
		return typeFloat64, 0, nil
	case []uint8:
		return typeArray, typeUint8, nil
	case []int8:
		return typeArray, typeInt8, nil
	case []uint16:
		return typeArray, typeUint16, nil
	case []int16:
		return typeArray, typeInt16, nil
	case []uint32:
		return typeArray, typeUint32, nil
	case []int32:
		return typeArray, typeInt32, nil
	case []float32:
		return typeArray, typeFloat32, nil
	case []bool:
		return typeArray, typeBool, nil
	case []string:
		return typeArray, typeString, nil
	case []uint64:
		return typeArray, typeUint64, nil
	case []int64:
		return typeArray, typeInt64, nil
	case []float64:
		return typeArray, typeFloat64, nil
	case []any:
		if err := checkNested(v, 1); err != nil {
			return 0, 0, err
		}
		return typeArray, typeArray, nil
	}
	return 0, 0, fmt.Errorf("unsupported metadata value type %T (use uint8..uint64, int8..int64, float32, float64, bool, string, a slice of one of those, or []any of slices)", v)
}

// checkNested verifies that every element of an array of arrays is itself an array, within the
// nesting limit the reader enforces; level is v's nesting level (1 for a top-level value).
func checkNested(v []any, level int) error {
	if len(v) > 0 && level+1 > maxArrayDepth {
		return fmt.Errorf("arrays nested deeper than %d levels", maxArrayDepth)
	}
	for i, e := range v {
		if inner, ok := e.([]any); ok {
			if err := checkNested(inner, level+1); err != nil {
				return err
			}
			continue
		}
		t, _, err := typeOf(e)
		if err != nil {
			return fmt.Errorf("array element %d: %w", i, err)
		}
		if t != typeArray {
			return fmt.Errorf("array element %d is a %T: an []any value must hold only arrays", i, e)
		}
	}
	return nil
}
