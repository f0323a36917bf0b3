// bench/sched.sh's goroutine workload: 64 goroutines each summing a range, results through a channel.
package main

import (
	"fmt"
	"sync"
)

func main() {
	out := make(chan uint64, 64)
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var s uint64
			for i := uint64(0); i < 500000; i++ {
				s += (i ^ uint64(g)) % 11
			}
			out <- s
		}(g)
	}
	wg.Wait()
	close(out)
	var total uint64
	for s := range out {
		total += s
	}
	fmt.Println(total)
}
