use strict;
use warnings;
use Test::More tests => 2;
require './lib.pl';
is(total(4, 0), 4, 'four and nothing');
is(total(), 0, 'nothing');
