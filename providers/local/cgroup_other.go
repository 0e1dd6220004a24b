//go:build !linux

package local

// Control groups are Linux's: elsewhere every task runs unconfined.
func detectCgroups(cfg Cgroups, _ string) *cgroupHost {
	if cfg.Disable {
		return &cgroupHost{conf: Confinement{Missing: "cgroup confinement is disabled (Config.Cgroups.Disable)"}}
	}
	return &cgroupHost{conf: Confinement{Missing: "cgroups need Linux: tasks run unconfined"}}
}
