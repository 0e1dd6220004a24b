//go:build tools

package deps

import (
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/alitto/pond/v2"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/hashicorp/golang-lru/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/shirou/gopsutil/v4/cpu"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/time/rate"
)
