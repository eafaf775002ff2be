//! Log following without GNU tail. (Being written.)
