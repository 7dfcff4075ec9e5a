package multi

// Parks returns how many of q's Waits parked.
func Parks(q *CompletionQueue) int64 { return q.parks.Load() }
