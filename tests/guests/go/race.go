// Two producers send into one channel and a select races two channels: the order printed depends on how the
// goroutines are scheduled.
package main

import (
	"fmt"
	"strings"
	"sync"
)

func main() {
	ch := make(chan string, 64)
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		wg.Add(1)
		go func(n string) {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				x := 0
				for j := 0; j < 20000; j++ {
					x += j
				}
				_ = x
				ch <- n
			}
		}(name)
	}
	wg.Wait()
	close(ch)
	var order []string
	for s := range ch {
		order = append(order, s)
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
