package broker

import (
	"context"
	"fmt"
)

// NextBatchAdmitted is NextBatch over the requests whose account admit
// accepts: the adapter's per-account share of its pending jobs. admit is
// called under the inbox's lock, once per module queue head looked at, so
// it must be quick and must not call the broker; a request it refuses
// keeps its place. With requests waiting but none admitted it waits, like
// NextBatch on an empty inbox, until ctx is done.
func (b *Broker) NextBatchAdmitted(ctx context.Context, n int, admit func(account string) bool) ([]*Delivery, error) {
	var pred func(Item) bool
	if admit != nil {
		pred = func(it Item) bool { return admit(it.Value.(*Delivery).Request.Account) }
	}
	for {
		n = max(n, 1)
		ds := make([]*Delivery, 0, min(n, 64))
		err := b.inbox.popAdmitted(ctx, n, pred, func(e *entry) { ds = append(ds, handOut(e)) })
		if err != nil {
			return nil, err
		}
		out, err := b.handOffBatch(ctx, ds)
		if len(out) > 0 {
			if err != nil {
				b.log.Warn("next batch: some requests go back to the inbox", "err", err)
			}
			b.m.handedOut.Add(int64(len(out)))
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("broker: next batch: %w", err)
		}
	}
}
