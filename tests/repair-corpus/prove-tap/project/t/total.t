use strict;
use warnings;
use Test::More tests => 2;
require './lib.pl';
is(total(1, 2, 3), 6, 'one two three');
is(total(5, 5), 10, 'five five');
