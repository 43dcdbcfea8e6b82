// Package statements counts the statements of a write command, as the
// benchmarks report them: each update or delete statement, each inserted
// document and each findAndModify counts one; reads count none.
package statements

import "go.mongodb.org/mongo-driver/v2/bson"

// Count returns the statements command cmd, named name, carries.
func Count(name string, cmd bson.Raw) int {
	field := ""
	switch name {
	case "findAndModify":
		return 1
	case "update":
		field = "updates"
	case "delete":
		field = "deletes"
	case "insert":
		field = "documents"
	case "bulkWrite":
		field = "ops"
	default:
		return 0
	}
	arr, ok := cmd.Lookup(field).ArrayOK()
	if !ok {
		// The driver sends a command's statements as a document sequence
		// (OP_MSG kind 1) that the monitor's command may not carry inline.
		return 1
	}
	vals, err := arr.Values()
	if err != nil {
		return 1
	}
	return len(vals)
}
