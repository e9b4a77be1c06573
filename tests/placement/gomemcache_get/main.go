// Reads keys back through gomemcache (github.com/bradfitz/gomemcache), for tests/placement.
// argv: the servers, in the order the application gives memcache.New; stdin: keys in hex, one a
// line. Prints the hex of every key gomemcache does not find, one a line.
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/bradfitz/gomemcache/memcache"
)

func main() {
	mc := memcache.New(os.Args[1:]...)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<20)
	var keys []string
	for in.Scan() {
		if k, err := hex.DecodeString(in.Text()); err == nil && len(k) > 0 {
			keys = append(keys, string(k))
		}
	}
	for i := 0; i < len(keys); i += 100 {
		end := i + 100
		if end > len(keys) {
			end = len(keys)
		}
		found, err := mc.GetMulti(keys[i:end])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, k := range keys[i:end] {
			if _, ok := found[k]; !ok {
				fmt.Println(hex.EncodeToString([]byte(k)))
			}
		}
	}
}
