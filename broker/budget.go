package broker

// readCap is how many messages one intake read may take so that, each
// held to at most MaxMessageBytes (resp.go cuts longer fields), the read
// holds at most MaxReadBytes.
func (b *Broker) readCap() int {
	return max(1, b.cfg.MaxReadBytes/max(1, b.cfg.MaxMessageBytes))
}
