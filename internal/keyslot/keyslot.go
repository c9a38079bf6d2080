// Package keyslot computes Redis Cluster's hash slot of a key, as
// CLUSTER KEYSLOT does: the gateway routes by it, tests place keys by it.
package keyslot

import "strings"

// Of is the Redis Cluster slot of key, as CLUSTER KEYSLOT computes
// it: CRC-16/XMODEM of the key's hash tag, modulo 16384.
func Of(key string) int { return int(crc16(HashTag(key)) % 16384) }

// HashTag is the part of key Redis Cluster hashes: what lies between the
// first '{' and the first '}' after it, when that is not empty; else the
// whole key.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
