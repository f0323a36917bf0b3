// Two producers send into one channel while the consumer reads, and a select races two ready channels: what is
// printed depends on how the goroutines, and the threads running them, interleave. Each producer enters the kernel
// now and then (sched_yield), as real goroutines do when they read, write or wait.
package main

import (
	"fmt"
	"strings"
	"syscall"
)

func main() {
	ch := make(chan string)
	for _, name := range []string{"a", "b"} {
		go func(n string) {
			for i := 0; i < 8; i++ {
				x := 0
				for j := 0; j < 20000; j++ {
					x += j
				}
				_ = x
				syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
				ch <- n
			}
		}(name)
	}
	var order []string
	for i := 0; i < 16; i++ {
		order = append(order, <-ch)
	}
	c1, c2 := make(chan int, 1), make(chan int, 1)
	var picks []string
	for i := 0; i < 8; i++ {
		c1 <- 1
		c2 <- 2
		select {
		case <-c1:
			picks = append(picks, "1")
			<-c2
		case <-c2:
			picks = append(picks, "2")
			<-c1
		}
	}
	fmt.Println(strings.Join(order, ""), strings.Join(picks, ""))
}
