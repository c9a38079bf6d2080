package ratelimit

// opt returns the options in force.
func (l *Limiters) opt() *Options { return l.live.Load() }

// SetOptions changes the options live (a config reload): every request
// that starts afterwards runs under them. KeyPrefix cannot change (it
// names every key): the one the limiters started with is kept. Turning
// the deny cache off or shrinking it forgets the denials it holds.
func (l *Limiters) SetOptions(o Options) {
	old := l.opt()
	o.KeyPrefix = old.KeyPrefix
	l.denials.resize(o.DenyCacheSize, !o.DenyCache)
	l.live.Store(&o)
	l.waiters.SetMax(o.MaxWaiters)
}

// resize sets the deny cache's bound (0: DefaultDenyCacheSize); it
// forgets every denial when the bound shrinks or clear is set.
func (c *denyCache) resize(n int, clear bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.bound()
	c.max = n
	if clear || c.bound() < old {
		c.byName, c.size = nil, 0
	}
}
