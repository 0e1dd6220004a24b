// Package providertest is the conformance suite for providers.Provider.
// Every implementation's tests call Run first, with a Commands value that
// says how to express the suite's little programs (print, exit, sleep, ...)
// on that backend, so every backend is held to the same contract: start,
// poll, stop, stop twice, cancel mid-run, timeout, unknown handle, env and
// payload pass-through.
package providertest
