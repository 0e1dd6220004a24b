package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// repairBatch is how many listed jobs RepairMirrors reads at a time, and
// repairBatches how many batches one call takes at most (the rest wait for
// the next call).
const (
	repairBatch   = 256
	repairBatches = 16
)

// RepairMirrors mirrors the job changes whose writer did not (Change's
// mirror lost to a crash or a failed round trip): each job listed in
// P:jobs:unmirrored at least grace ago has its record written onto its
// job entry and its duplicates' entries, with compute.job.finished when
// it has ended, and is taken off the list. A job whose record is gone
// (its retention ran out) is taken off with nothing written. grace
// leaves a writer's own mirror, which normally follows its change within
// milliseconds (a start's, once the provider started the task), time to
// land: a repair racing it only writes the same record twice (for an end,
// raising the event twice, which readers allow). A record that changes
// while it is mirrored (listed anew, which the repair's mirror takes off
// the list) is mirrored again, so that the entry never stays at the
// older record. A record that cannot be decoded is taken off with a
// warning: no mirror can come of it. It returns how many jobs it
// mirrored.
func (s *Store) RepairMirrors(ctx context.Context, grace time.Duration) (int, error) {
	cutoff := formatFloat(s.now() - grace.Seconds())
	repaired := 0
	for range repairBatches {
		zs, err := s.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.JobsUnmirrored(),
			Start: "-inf", Stop: cutoff, ByScore: true, Count: repairBatch}).Result()
		if err != nil {
			return repaired, fmt.Errorf("jobs: repair mirrors: %w", err)
		}
		var errs []error
		for _, z := range zs {
			id, _ := z.Member.(string)
			ok, err := s.repairMirror(ctx, id)
			switch {
			case err != nil:
				errs = append(errs, err) // listed still: the next repair tries again
			case ok:
				repaired++ // the mirror took it off the list
			default:
				if err := s.rdb.ZRem(ctx, s.keys.JobsUnmirrored(), id).Err(); err != nil {
					errs = append(errs, fmt.Errorf("jobs: repair mirror %s: unlist: %w", id, err))
				}
			}
		}
		if len(errs) > 0 || len(zs) < repairBatch {
			return repaired, errors.Join(errs...)
		}
	}
	return repaired, nil
}

// repairMirror mirrors job id's record, until the record read before the
// mirror is still the record after it (at most a few times). It reports
// whether it mirrored: not when the record is gone or unreadable.
func (s *Store) repairMirror(ctx context.Context, id string) (bool, error) {
	for range 3 {
		h, err := s.recordHash(ctx, id)
		if err != nil {
			return false, fmt.Errorf("jobs: repair mirror %s: %w", id, err)
		}
		if len(h) == 0 {
			return false, nil // expired with its retention
		}
		j, err := decodeRecord(h)
		if err != nil {
			s.log.Warn("job record unreadable; its job entry cannot be repaired", "job", id, "err", err)
			return false, nil
		}
		if err := s.mirrorAll(ctx, j.JobData, h); err != nil {
			return false, fmt.Errorf("jobs: repair mirror %s: %w", id, err)
		}
		v, err := s.rdb.HGet(ctx, s.keys.Job(id), "version").Int64()
		if errors.Is(err, redis.Nil) || err == nil && v == j.Version {
			s.log.Info("mirrored a job change its writer had not", "job", id, "status", j.Status)
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("jobs: repair mirror %s: %w", id, err)
		}
	}
	return false, fmt.Errorf("jobs: repair mirror %s: the record kept changing", id)
}
