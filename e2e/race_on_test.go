//go:build race

package e2e

// The binary under test is built with -race when the tests are.
const raceFlag = "-race"
