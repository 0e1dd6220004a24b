package dispatch

import (
	"maps"
	"math"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// EngineJob converts a job record to the engine's view; storage requests
// that name no tier take defaultTier.
func EngineJob(j jobs.Job, submitted time.Time, defaultTier string) engine.Job {
	r := j.Request.Resources
	var req engine.Resources
	req[engine.DimCPU] = int64(math.Ceil(r.CPUCores * 1000))
	req[engine.DimMemory] = int64(math.Ceil(r.MemoryGB * 1024))
	req[engine.DimGPU] = int64(r.GPUCount)
	req[engine.DimGPUMemory] = int64(math.Ceil(r.GPUMemoryGB*1024)) * int64(max(r.GPUCount, 1))
	if r.GPUMemoryGB == 0 {
		req[engine.DimGPUMemory] = 0
	}
	req[engine.DimNetwork] = int64(math.Ceil(r.NetworkMbps))
	if r.StorageGB > 0 {
		tier := r.StorageTier
		if tier == "" {
			tier = defaultTier
		}
		if dim, ok := engine.TierDim(tier); ok {
			req[dim] = int64(math.Ceil(r.StorageGB))
		}
	}
	ej := engine.Job{
		ID: j.JobID, Account: j.Account, Priority: j.Priority, Submitted: submitted,
		Request: req, GPUModel: r.GPUModel, MIGProfile: r.MIGProfile, StorageTier: r.StorageTier,
		NodeSelector: j.Request.NodeSelector, NUMALocal: r.NUMALocal,
		GangID: j.Request.GangID, GangSize: j.Request.GangSize,
		Strategy: engine.Strategy(j.Request.Placement),
	}
	if p := j.Request.Provider; p != "" && ej.NodeSelector[wire.ProviderLabel] != p {
		// The request's provider is one more selector pair: the nodes of
		// other providers do not match it.
		ej.NodeSelector = maps.Clone(ej.NodeSelector)
		if ej.NodeSelector == nil {
			ej.NodeSelector = map[string]string{}
		}
		ej.NodeSelector[wire.ProviderLabel] = p
	}
	if j.Request.Deadline > 0 {
		ej.Deadline = epochTime(j.Request.Deadline)
	}
	if j.Request.EstimatedDuration > 0 {
		ej.EstDuration = time.Duration(j.Request.EstimatedDuration * float64(time.Second))
	}
	return ej
}

func epochTime(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9))
}
