package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A waiter listens from before it asks: a change made between its ask
// and its sleep (Wake before sleep) ends that sleep at once, and so does
// one made after a sleep a wake ended. One watch serves the whole wait.
func TestWakeBetweenAskAndSleep(t *testing.T) {
	var watched []string
	s := &sleepers{watch: func(name string) { watched = append(watched, name) }}
	w := s.listen("a")
	for i := range 2 {
		s.wake("a") // the change, made while the waiter asks
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := w.sleep(ctx, time.Hour)
		cancel()
		if err != nil {
			t.Fatalf("wake %d before the sleep: slept until %v", i+1, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("sleep with no wake: %v, want the context's end", err)
	}
	w.stop()
	if len(s.m["a"]) != 0 || len(watched) != 1 {
		t.Errorf("after stop: %d registered, %d watches started; want 0 and 1", len(s.m["a"]), len(watched))
	}
}

// At most max waiters are let in, counted as waiting only once queued;
// one leaving lets the next in; 0 is no bound.
func TestWaitersBound(t *testing.T) {
	var w Waiters
	w.SetMax(2)
	a, errA := w.Enter()
	b, errB := w.Enter()
	if errA != nil || errB != nil {
		t.Fatal("a waiter within the bound was refused")
	}
	if n := w.Len(); n != 0 {
		t.Fatalf("%d waiting before any is queued, want 0", n)
	}
	a.Queued()
	a.Queued()
	if n := w.Len(); n != 1 {
		t.Fatalf("%d waiting with one queued (twice), want 1", n)
	}
	if _, err := w.Enter(); !errors.As(err, new(TooManyWaitersError)) {
		t.Fatalf("third waiter with max 2 (one not queued yet): %v, want TooManyWaitersError", err)
	}
	b.Leave() // never queued
	c, err := w.Enter()
	if err != nil {
		t.Fatalf("after one left: %v, want let in", err)
	}
	c.Queued()
	if n := w.Len(); n != 2 {
		t.Fatalf("%d waiting, want 2", n)
	}
	a.Leave()
	c.Leave()
	if n := w.Len(); n != 0 {
		t.Fatalf("%d waiting after all left, want 0", n)
	}
	w.SetMax(0)
	for range 3 {
		if _, err := w.Enter(); err != nil {
			t.Fatalf("no bound: %v", err)
		}
	}
}
