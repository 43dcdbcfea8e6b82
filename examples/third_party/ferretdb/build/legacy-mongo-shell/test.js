// Please do not merge changes in this file.

(function() {
  'use strict';

  print('test.js passed!');
})();
