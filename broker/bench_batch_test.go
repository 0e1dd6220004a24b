package broker

import "context"

// The batch API in the benchmarks: one intake loop calling NextBatch (then
// AcceptBatch), as an adapter adopting it would.

const benchBatch = 64

func init() {
	benchConsumers = append(benchConsumers, benchConsumer{name: "batch", run: consumeBatch})
}

func consumeBatch(ctx context.Context, br *Broker, accept bool, got func(*Delivery)) {
	for {
		ds, err := br.NextBatch(ctx, benchBatch)
		if err != nil {
			return
		}
		if !accept {
			for _, d := range ds {
				_ = br.inbox.Ack(d.lease)
				got(d)
			}
			continue
		}
		for i, r := range br.AcceptBatch(ctx, ds) {
			if r.Err != nil {
				if ctx.Err() == nil {
					panic(r.Err)
				}
				return
			}
			got(ds[i])
		}
	}
}
