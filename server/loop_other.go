//go:build !linux

package server

import "net"

// clientLoop is Linux's (loop_linux.go): elsewhere every client has a
// goroutine.
type clientLoop struct{}

func (s *Server) startLoop() error             { return nil }
func (s *Server) stopLoop()                    {}
func (l *clientLoop) take(c net.Conn) net.Conn { return nil }
func (s *Server) loopServe(g *guardedConn)     {}
