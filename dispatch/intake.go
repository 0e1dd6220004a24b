package dispatch

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/wire"
)

// intakeBatch is the most requests taken from the inbox in one round.
const intakeBatch = 64

// intake takes requests from the broker, makes them durable jobs and hands
// them to the scheduling loop, until ctx is done.
//
// MaxPending is shared by the accounts by their shares: an account with
// jobs waiting in the engine takes new ones only while it holds fewer than
// its share of MaxPending among the accounts that have jobs waiting (see
// intakeAdmit), so one account's requests that cannot start never stop
// another's. Requests of an account at its share stay in the inbox and,
// past its capacity, in Redis.
func (s *Scheduler) intake(ctx context.Context) error {
	for {
		// A hard bound for memory: twice MaxPending.
		for s.pendingCount()+len(s.incoming) >= 2*s.cfg.MaxPending {
			select {
			case <-ctx.Done():
				return nil
			case <-s.room:
			case <-time.After(100 * time.Millisecond):
			}
		}
		admit := s.intakeAdmit()
		nctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		dels, err := s.in.NextBatchAdmitted(nctx, intakeBatch, admit)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			s.log.Warn("intake: next", "err", err)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return nil
			}
			continue
		}
		results := s.in.AcceptBatch(ctx, dels)
		for i, r := range results {
			if r.Err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if !errors.Is(r.Err, broker.ErrLeaseLost) {
					s.log.Warn("intake: accept", "entry_id", dels[i].EntryID, "err", r.Err)
				}
				continue
			}
			if r.Job.Status != wire.JobQueued || r.Job.RequestEntryID != dels[i].EntryID {
				continue // a duplicate idempotency key, or cancelled while accepting
			}
			s.mu.Lock()
			s.handedOver[r.Job.Account]++
			s.mu.Unlock()
			select {
			case s.incoming <- r.Job:
			case <-ctx.Done():
				return nil
			}
		}
		s.poke()
	}
}

func (s *Scheduler) pendingCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingN
}

// intakeAdmit returns the intake's admission test for one batch: account
// a may take a request while it holds fewer than
//
//	MaxPending × S_a / (S_a + Σ S_b over the other accounts with pending jobs)
//
// pending jobs (S: the account's configured shares, 1 by default), counting
// the requests this batch already took and those on their way to the
// engine.
func (s *Scheduler) intakeAdmit() func(account string) bool {
	s.mu.Lock()
	held := maps.Clone(s.handedOver)
	if held == nil {
		held = map[string]int{}
	}
	for a, n := range s.pendingBy {
		held[a] += n
	}
	s.mu.Unlock()
	var total float64
	for a := range held {
		total += s.shares(a)
	}
	limit := float64(s.cfg.MaxPending)
	return func(a string) bool {
		sh := s.shares(a)
		others := total
		if held[a] > 0 {
			others -= sh
		}
		if float64(held[a]) >= limit*sh/(sh+others) {
			return false
		}
		held[a]++
		if held[a] == 1 {
			total += sh
		}
		return true
	}
}

// shares is an account's configured shares (1 when not configured).
func (s *Scheduler) shares(account string) float64 {
	for _, a := range s.cfg.Accounts {
		if a.Name == account && a.Shares > 0 {
			return a.Shares
		}
	}
	return 1
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
