//go:build race

package dispatch

// raceEnabled: the race detector changes allocation sizes and timings.
const raceEnabled = true
