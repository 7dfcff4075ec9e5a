//go:build !race

package tcp

func raceWritten() {}
func raceRead()    {}
