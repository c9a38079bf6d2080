package coalesce

// ErrBatchShape: a RunFunc returned a different number of results than
// it was given items. Every item of that batch gets it.
var ErrBatchShape error = batchShapeError{}

type batchShapeError struct{}

func (batchShapeError) Error() string { return "coalesce: batch returned the wrong number of results" }
