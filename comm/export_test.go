package comm

// StagingBytes is the staging memory c holds now (its links' slots).
func StagingBytes(c *Comm) int64 { return c.stagingBytes.Load() }

// LinkStagingBytes is the staging memory of one link of c.
func LinkStagingBytes(c *Comm) int64 { return int64(c.opts.Slots) * int64(c.opts.ChunkSize) }
